/* py_offsets.c: prints the CPython struct offsets the shim reads Python frames with
 * (shim/src/python/layout.rs), from the interpreter's own headers, one `name value` per
 * line. Built and run by tests/e2e_python.rs against every python3.X installed, which
 * compares the output with the shim's table: the table can never silently disagree with
 * the headers of a version this machine has.
 *
 * Build: cc -I<python include dir> -I<python include dir>/internal py_offsets.c
 * (Py_BUILD_CORE exposes the internal frame and thread-state structs).
 */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#endif
#if PY_VERSION_HEX < 0x030B0000
#include <frameobject.h>
#endif

#define P(name, value) printf("%s %ld\n", name, (long)(value))

int main(void) {
    P("version", PY_MAJOR_VERSION * 100 + PY_MINOR_VERSION);
    P("ob_type", offsetof(PyObject, ob_type));
#if PY_VERSION_HEX >= 0x030D0000
    P("tstate_frame", offsetof(PyThreadState, current_frame));
    P("cframe_current", -1);
#elif PY_VERSION_HEX >= 0x030B0000
    P("tstate_frame", offsetof(PyThreadState, cframe));
    P("cframe_current", offsetof(_PyCFrame, current_frame));
#else
    P("tstate_frame", offsetof(PyThreadState, frame));
    P("cframe_current", -1);
#endif
#if PY_VERSION_HEX >= 0x030D0000
    P("frame_code", offsetof(_PyInterpreterFrame, f_executable));
    P("frame_previous", offsetof(_PyInterpreterFrame, previous));
    P("frame_instr", offsetof(_PyInterpreterFrame, instr_ptr));
    P("frame_owner", offsetof(_PyInterpreterFrame, owner));
    P("frame_is_entry", -1);
#elif PY_VERSION_HEX >= 0x030C0000
    P("frame_code", offsetof(_PyInterpreterFrame, f_code));
    P("frame_previous", offsetof(_PyInterpreterFrame, previous));
    P("frame_instr", offsetof(_PyInterpreterFrame, prev_instr));
    P("frame_owner", offsetof(_PyInterpreterFrame, owner));
    P("frame_is_entry", -1);
#elif PY_VERSION_HEX >= 0x030B0000
    P("frame_code", offsetof(_PyInterpreterFrame, f_code));
    P("frame_previous", offsetof(_PyInterpreterFrame, previous));
    P("frame_instr", offsetof(_PyInterpreterFrame, prev_instr));
    P("frame_owner", offsetof(_PyInterpreterFrame, owner));
    P("frame_is_entry", offsetof(_PyInterpreterFrame, is_entry));
#else
    P("frame_code", offsetof(PyFrameObject, f_code));
    P("frame_previous", offsetof(PyFrameObject, f_back));
    P("frame_instr", offsetof(PyFrameObject, f_lasti));
    P("frame_owner", -1);
    P("frame_is_entry", -1);
#endif
    P("code_filename", offsetof(PyCodeObject, co_filename));
#if PY_VERSION_HEX >= 0x030B0000
    P("code_name", offsetof(PyCodeObject, co_qualname));
    P("code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
    P("code_firsttraceable", offsetof(PyCodeObject, _co_firsttraceable));
#else
    P("code_name", offsetof(PyCodeObject, co_name));
    P("code_adaptive", -1);
    P("code_firsttraceable", -1);
#endif
    P("code_firstlineno", offsetof(PyCodeObject, co_firstlineno));
    P("unicode_length", offsetof(PyASCIIObject, length));
    P("unicode_state", offsetof(PyASCIIObject, state));
    P("unicode_ascii_data", sizeof(PyASCIIObject));
    P("unicode_compact_data", sizeof(PyCompactUnicodeObject));
    return 0;
}
