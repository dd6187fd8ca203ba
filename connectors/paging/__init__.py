"""One query's pages: each asked for once, kept before it is read, and where paging ends."""
