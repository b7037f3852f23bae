"""Job types of your own: PUT/GET/DELETE /types (views), their rules and rows (catalog), the
payload check at enqueue (checks), admin pages and OpenAPI. Built-in types are listed beside
them, each with its payload's JSON Schema made from its contract (contract/jobtypes)."""
