"""Your task: the networks, the LightningModule and the DataModules. Edit, replace or add freely.

The example here classifies images: ``classifier.Classifier`` trains a network of ``networks.py`` on
``gratings.GratingsDataModule`` (embedded, generated from a seed) or ``image_folder.ImageFolderDataModule``
(class-per-folder images on disk). Configs select them by class path.
"""
