"""A Django project of someone else's, as `django-admin startproject` makes it, with the broker's
URLs included under /queue/ (the contract's two lines): its URLconf and settings for tests that
run in this process (tests/api/test_api_in_your_project.py)."""
