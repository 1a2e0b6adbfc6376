"""Tools around training: the LR and batch-size finders, the schedule preview, export, prediction."""
