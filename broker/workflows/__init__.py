"""Workflows: a graph of tasks submitted in one call (API.md "Workflows"). This package checks
graphs and answers the API; the tasks' moves are broker.queue's (graphs, dependencies)."""
