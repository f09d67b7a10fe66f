"""What an environment *is*, before any episode runs: the manifest, the state model and tools (with the
one argument policy), package loading, tasks and validation scenarios, initial-state resolution, and the
catalog with its Gymnasium ids.  Everything here is immutable once loaded and shared by every session.

Modules, lowest first: :mod:`.arguments` and :mod:`.manifest`; :mod:`.tools`, :mod:`.tasks` and
:mod:`.scenarios`; :mod:`.spec`; :mod:`.package`; :mod:`.catalog`; :mod:`.states`.
"""
