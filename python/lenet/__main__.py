"""python -m lenet: the same as lenet-cli; ``python -m lenet --cmake-dir`` prints the
folder of the C++ API's CMake package (find_package(lenet), docs/cpp.md)."""

import sys

if sys.argv[1:] == ["--cmake-dir"]:
    from .cpp import cmake_dir

    print(cmake_dir())
    sys.exit(0)

from .cli import main  # noqa: E402

sys.exit(main())
