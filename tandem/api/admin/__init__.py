"""The admin API (accounts and tokens): admin_api.py."""
