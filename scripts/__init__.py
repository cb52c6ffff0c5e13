"""User-facing tools, also installed as console commands (sumrl-table4, sumrl-score, sumrl-correlate)."""
