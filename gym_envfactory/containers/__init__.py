"""Everything Docker: building the base, runtime and environment images offline (:mod:`.images`),
starting hardened environment containers (:mod:`.run`), and a catalog as one compose project
(:mod:`.compose`).  Needs the ``docker`` extra; nothing in the runtime's core imports it.
"""
