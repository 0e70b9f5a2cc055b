"""Configuration: every setting declared once, one module per area (*_settings.py), assembled in settings.py;
how a declaration becomes values, flags and tables (declarations.py), the validators (validators.py) and a
setting's closed sets (modes.py), and where state is kept by default (paths.py)."""
