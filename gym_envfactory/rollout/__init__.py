"""Rollouts outside a trainer: policies (oracle, noisy, random, any OpenAI-compatible endpoint) in
:mod:`.policies`, and the episode runner and trajectory writer in :mod:`.runner`.
"""
