"""The settings panels of the main window: model, dataset, reward, hyperparameters."""
