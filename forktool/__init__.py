"""Tooling for the vLLM 0.26.0 fork: materialize, export, build and check the
patch series kept in ``patches/`` (see README.md)."""
