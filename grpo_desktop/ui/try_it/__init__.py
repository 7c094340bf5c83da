"""The Try tab: the base model and a checkpoint answer the same prompt side by side (view), the problem picker (problems), one answer pane (pane, render), the job thread (worker)."""
