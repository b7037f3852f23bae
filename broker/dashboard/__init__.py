"""The live dashboard for staff: a page and the JSON snapshot it refreshes itself from."""
