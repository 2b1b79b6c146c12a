"""StopWatch: the generator's notice that tritonserver is stopping (no server: readiness is a stand-in)."""

from __future__ import annotations

import threading

from tritongen.triton.stop_watch import StopWatch


def watch(answers: list) -> tuple[StopWatch, threading.Event, list]:
    """A StopWatch whose readiness gives `answers` in turn (an exception is raised), then the last one forever."""
    stopped, asked = threading.Event(), []

    def ready() -> bool:
        answer = answers[min(len(asked), len(answers) - 1)]
        asked.append(answer)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return StopWatch(ready, stopped.set, lambda: True, interval=0.01), stopped, asked


def test_not_ready_after_ready_is_the_stop():
    watcher, stopped, _ = watch([True, True, False])
    assert stopped.wait(5)
    watcher.close()


def test_server_not_ready_raised_is_the_stop_even_before_ready():
    watcher, stopped, _ = watch([False, RuntimeError("Server not ready")])
    assert stopped.wait(5)
    watcher.close()


def test_idle_is_never_asked():
    stopped, asked = threading.Event(), []
    watcher = StopWatch(lambda: asked.append(1) or False, stopped.set, lambda: False, interval=0.01)
    assert not stopped.wait(0.1) and not asked
    watcher.close()


def test_not_ready_while_loading_is_no_stop():
    watcher, stopped, asked = watch([False, False, False, False, False, True])
    assert not stopped.wait(0.2)
    assert len(asked) > 5
    watcher.close()
