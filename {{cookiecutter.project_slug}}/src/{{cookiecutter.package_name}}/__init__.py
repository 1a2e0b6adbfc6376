"""Image classification with PyTorch Lightning, configured from YAML through LightningCLI."""

__version__ = "0.1.0"
