// Releasing the GIL around core work so that a thread in that work survives interpreter exit.
// Shared by every binding file of polyquant._polyquant_ext (the state below is one per process:
// C++17 inline variables).
//
// Interpreter exit. Once CPython marks the interpreter as finalizing, a daemon thread that takes
// the GIL back is ended with pthread_exit, and that forced unwind through this module's C++ frames
// reaches noexcept code (nanobind releasing the call's arrays takes the GIL again) and calls
// std::terminate: the process aborts. Checking the flag before PyEval_RestoreThread is not enough,
// as the flag can be set while the thread waits for the GIL. So the module takes part in the exit:
// an atexit callback (CPython runs them with the GIL, before it marks the interpreter as
// finalizing) sets `g_exiting` and then releases the GIL until no thread is between its check of
// `g_exiting` and holding the GIL. Every thread either saw the flag (it parks, and dies with the
// process, as a thread inside a numpy call does) or is counted in `g_reacquiring` and gets the GIL
// before finalization begins. seq_cst on both sides: the flag store precedes the counter load, the
// counter increment precedes the flag load, so one of the two sees the other. The thread running
// the exit (and calling polyquant from later exit code) never parks.
#pragma once

#include <Python.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

namespace polyquant::python {

inline bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

inline std::atomic<bool> g_exiting{false};
inline std::atomic<int> g_reacquiring{0};
inline std::atomic<std::thread::id> g_exiting_thread{};

// The atexit callback (registered once, by the module's init).
inline void stop_reacquiring_at_exit() {
  g_exiting_thread.store(std::this_thread::get_id());
  g_exiting.store(true);
  Py_BEGIN_ALLOW_THREADS
  while (g_reacquiring.load() != 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  Py_END_ALLOW_THREADS
}

// PyEval_RestoreThread(state), or never returns when the interpreter is exiting.
inline void acquire_gil_or_park(PyThreadState* state) {
  g_reacquiring.fetch_add(1);
  const bool exiting = g_exiting.load() && g_exiting_thread.load() != std::this_thread::get_id();
  if (exiting || interpreter_finalizing()) {
    g_reacquiring.fetch_sub(1);
    for (;;) pause();
  }
  PyEval_RestoreThread(state);
  g_reacquiring.fetch_sub(1);
}

// RAII: the GIL is released for the scope's lifetime and taken back (or the thread parks) at its
// end, on a normal exit and while an exception unwinds alike. Use instead of
// nb::gil_scoped_release, which would take the GIL back during finalization.
class ReleasedGil {
 public:
  ReleasedGil() : state_(PyEval_SaveThread()) {}
  ~ReleasedGil() { acquire_gil_or_park(state_); }
  ReleasedGil(const ReleasedGil&) = delete;
  ReleasedGil& operator=(const ReleasedGil&) = delete;

 private:
  PyThreadState* state_;
};

// f() run without the GIL; its result (or exception) once the GIL is back.
template <class F>
decltype(auto) without_gil(F&& f) {
  ReleasedGil released;
  return std::forward<F>(f)();
}

}  // namespace polyquant::python
