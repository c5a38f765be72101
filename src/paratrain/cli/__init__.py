"""The `paratrain` command line: a thin layer that parses, calls the library and renders."""
