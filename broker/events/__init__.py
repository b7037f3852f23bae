"""Waiting for events (API.md "Waiting for events, and approvals"): POST and GET /events,
POST /jobs/{id}/wait. The moves live in broker.queue.events."""
