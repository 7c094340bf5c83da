"""Exporting a trained run: adapter, merged model, GGUF (with a Modelfile) and a TRL project.

See engine/README.md for what lives where.
"""
