"""Installers for backends that need more than `pip install` (Horovod: a patched build)."""
