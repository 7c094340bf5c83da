"""Building blocks shared by the views: small widgets, the config form, the wheel guard, the code editor, background tasks."""
