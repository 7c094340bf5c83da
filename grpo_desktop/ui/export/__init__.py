"""File ▸ Export…: the Export dialog, its checkpoint list, the export's background job and the
window's Export action.

The dialog is dialog.py; what lives where: grpo_desktop/ui/README.md.
"""
