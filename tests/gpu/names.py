"""Names a Python script reads but never defines (tests/gpu_suite.rs runs it over the suite).

Much of the real-GPU suite runs only where a framework and a GPU are (the simulated mode
skips the frameworks), so a misspelt or pasted name there shows only on a GPU, after the
device time is spent. This finds such names without running the code: a name read in some
scope that no enclosing scope, the module's own bindings (assignments, imports, functions,
classes) or the builtins define.

    names.py FILE...

Prints `FILE:LINE: NAME, read in SCOPE, is never defined` for each, and exits 1 if there is any.
"""

import ast
import builtins
import sys
import symtable

# Names every module has without binding them.
MODULE_NAMES = {"__file__", "__name__", "__doc__", "__spec__", "__loader__", "__package__",
                "__builtins__"}


def undefined(source, path):
    """(line, scope, name) for each name read in `source` that nothing defines: the line of
    the scope that reads it (of the first read, at module level)."""
    table = symtable.symtable(source, path, "exec")
    scopes = []

    def collect(scope):
        scopes.append(scope)
        for child in scope.get_children():
            collect(child)

    collect(table)
    # The module's bindings, and the names a function binds with a `global` statement.
    bound = {s.get_name() for scope in scopes for s in scope.get_symbols()
             if (scope is table or s.is_declared_global())
             and (s.is_assigned() or s.is_imported() or s.is_namespace())}
    known = bound | set(dir(builtins)) | MODULE_NAMES
    found = []
    for scope in scopes:
        for symbol in scope.get_symbols():
            name = symbol.get_name()
            if symbol.is_referenced() and (symbol.is_global() or scope is table) \
                    and name not in known:
                found.append((scope, name))
    reads = {}
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            reads[node.id] = min(reads.get(node.id, node.lineno), node.lineno)
    return sorted((reads.get(name, 0) if scope is table else scope.get_lineno(),
                   scope.get_name(), name) for scope, name in found)


def main(paths):
    found = 0
    for path in paths:
        with open(path) as f:
            source = f.read()
        for line, scope, name in undefined(source, path):
            print("%s:%d: %s, read in %s, is never defined" % (path, line, name, scope))
            found += 1
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
