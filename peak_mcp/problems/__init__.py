"""Problems: the interface (`base.Problem`), the built-in classes (matmul), problem files read as declarations
(`declaration`, `describe`), run (`loading`, `code`) and served as problems (`declared`), the registry that serves
them by name (`registry`) and what ships with the server (`shipped`). Imports `core` and `confine`."""
