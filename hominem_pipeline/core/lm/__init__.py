"""Language models: where the offline models are, how a model folder is named, the device, generation."""
