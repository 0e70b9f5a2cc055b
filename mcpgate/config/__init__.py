"""Configuration: every setting declared once (settings.py), how a declaration becomes values, flags
and tables (declarations.py), and the validators (validators.py)."""
