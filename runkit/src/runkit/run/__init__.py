"""The run: its folder (``folders.py``), its record ``provenance.yaml`` (``provenance.py`` writes it, and nothing
else does; ``records.py`` reads it back; ``facts.py`` gathers what a session records), its lock (``lock.py``), the
session a command holds on it (``session.py``), its TensorBoard logger (``logger.py``), its own ``config.yaml``
(``config.py``) and what a resume may change (``resume_keys.py``).

It imports neither ``command/`` nor ``trackers/``: the command line builds a session, and the trackers keep their
ids in the record through ``RunRecord``.
"""
