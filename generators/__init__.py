"""EnvFactory generators (import name ``gym_envfactory.generators``): EnvGen, importers, the LLM layer."""
