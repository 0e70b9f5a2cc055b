"""The HTTP side: the only package that imports Flask."""
