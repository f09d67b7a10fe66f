"""Experiments on gym_envfactory, outside the installed package (docs/training.md, "The recipe").

Each recipe is a script run from the repository root (``python -m recipes.<name>``); it may import the
package (``gym_envfactory.training.*``) and its extras, and nothing imports it but its tests.

- :mod:`.smollm2`: SFT → GRPO on SmolLM2-135M-Instruct on CPU, evaluated on held-out tasks (``make recipe``).
"""
