"""Experiment trackers: any of Lightning's loggers, alone or several under ``trainer.logger``, keeps the run whole.

``configs/logger/`` has a preset per tracker (``tensorboard``, ``csv``, ``mlflow``, ``wandb``); each appends
its logger (``logger+:``), so they stack. Whatever a logger's config says about *where* it writes, the kit
decides it from the run, so checkpoints, ``config.yaml``, ``provenance.yaml`` and every tracker's files stay
in ``runs/<experiment>/<run>/``, and ``runs`` and ``--ckpt_path last|best`` work with any of them:

- TensorBoard: events in the run folder (``run/logger.py``); CSV: ``<run>/metrics.csv``;
- MLflow: a run named after the run folder, in the experiment ``run.experiment`` (unless ``experiment_name``
  is set), on ``tracking_uri`` (a server, ``sqlite:///...``) or, without one, the local store
  ``<trainer.default_root_dir>/mlruns``; the resolved config as parameters, the git commit and dirty flag as
  tags, ``config.yaml`` and ``provenance.yaml`` as artifacts, and the run's status at the end;
- W&B: files in ``<run>/wandb/``, the project ``run.experiment`` unless ``project`` is set; its config holds
  the keys MLflow's parameters hold (the resolved config, and the module's hyperparameters flattened alike).

The tracker ids (MLflow's run id, W&B's id) are kept in ``provenance.yaml`` under ``trackers``; a resume
(``--ckpt_path last``) continues the same tracked run, with each step logged once: TensorBoard and CSV drop
what the stopped session logged after its checkpoint, MLflow and W&B skip what they already hold. A tracker
whose package is missing, a tracking URL that cannot work, an artifact root that cannot be written or a
tracker id that belongs to another run stop the command before anything is written (exit 2); a tracking server
that fails mid-run is reported once and recorded, and training goes on. Each logger subclass changes only what
Lightning's gets wrong for a run that is stopped and resumed (said on the class); each keeps ``logged_step``, the
last step it logged: ``provenance.yaml`` records it with each checkpoint, and a resume starts the trackers after it.

Files: ``kinds.py`` (the extension point: a ``Tracker`` places one kind of Lightning logger in a run; a new tracker
is one file and one ``register`` call), ``entries.py`` (what ``trainer.logger`` holds), ``placement.py`` (the
loggers of a ``fit``, told where the run is, and the four trackers the kit registers; ids into provenance),
``csv_logger.py``, ``mlflow_logger.py``, ``wandb_logger.py`` (Lightning's loggers, continued across resumes),
``tracked_run.py`` (checkpoints in the run folder, loggers flushed with them). The trackers' settings are checked
before anything is built by ``command/tracker_checks.py``; no credential reaches a file a run writes
(``credentials.py``). Nothing is imported here: ``command/`` imports these modules, and they import the run
(``run/``: its folder and record, where the tracker ids are kept), never ``command/``.
"""
