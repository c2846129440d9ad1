"""`python -m gpumemprof ...`: the `gpumemprof` command of this environment."""

import os
import sys
import sysconfig


def main():
    exe = os.path.join(sysconfig.get_path("scripts"), "gpumemprof")
    if not os.path.isfile(exe):
        sys.exit(f"gpumemprof: the command is not installed beside this Python ({exe})")
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
