"""The generic emulation: a declared endpoint served with no code of its own. A declaration (the plain data of
harvest's `endpoints:` format) is read into the sandbox's form, its records made from its columns, its pages in
its paging style with that style's traps."""
