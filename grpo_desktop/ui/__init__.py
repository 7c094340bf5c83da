"""The PySide6 desktop application: thin panels over the session model and the training worker."""
