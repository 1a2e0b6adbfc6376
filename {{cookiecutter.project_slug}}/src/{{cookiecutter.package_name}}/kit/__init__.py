"""The kit: the command line, checkpoints, exact resume, preemption, safeguards, schedules, observability,
prediction and export. It works with any LightningModule and LightningDataModule and never imports from
``task``; what it reads from a task is listed in ``protocol.py``. Updated from the template (``cruft update``).
"""
