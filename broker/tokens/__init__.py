"""Access tokens with grants: who may do what on which queues (API.md, "Access tokens with
grants").

    grants.py   the grammar (`produce+consume:tenant-a.*`) and `Access`, what one caller may do
    auth.py     the bearer check: env tokens, database tokens behind a per-process cache
    access.py   the one rule every view asks: 401, 403, or 404 where a 403 would tell too much
    secrets.py  making a token (the secret shown once, its hash kept), SQS keys (Fernet)
    admin.py    list, add (the secret shown once), revoke
"""
