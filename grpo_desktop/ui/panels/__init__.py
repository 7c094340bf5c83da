"""The settings panels of the main window: model, dataset, reward, hyperparameters, and under them
*Will it fit?* (the estimate's view, text, bar and child process).

What lives where: grpo_desktop/ui/README.md.
"""
