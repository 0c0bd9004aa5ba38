"""tests/handlers.py's this_thread_sleep: another thread's sleep never reaches the fake."""
import threading

from tests.handlers import this_thread_sleep


def test_only_the_calling_thread_reaches_the_fake():
    got = []
    sleep = this_thread_sleep(got.append)
    t = threading.Thread(target=sleep, args=(0.001,))
    t.start()
    t.join()
    sleep(5)
    assert got == [5]
