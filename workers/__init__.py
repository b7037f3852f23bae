"""Workers that claim tasks from the broker over HTTP, and the commands that run them."""
