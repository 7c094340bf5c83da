"""The saved session document: pure Python, no Qt, no torch."""
