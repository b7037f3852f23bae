"""History: what happened, minute by minute, per queue (GET /stats/history and the dashboard's
charts). A room of its own: it moves no task. It reads the counter rows that every move of
broker.queue already keeps, so recording costs the hot path nothing.

    recorder.py  the sweeper's recording, compaction of minutes into hours, pruning
    reading.py   the points of a range, with what no recording has counted yet
    views.py     GET /stats/history
    sql.py       its statements
    schema.py    its OpenAPI, merged into the API's by broker/api/schema.py
"""
