"""Helpers shared by the benchmark scripts."""
import time


def wait_without_spinning(comm):
    """The ranks that are not running scikit-learn wait here without taking a core (MPI waits spin)."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.01)


def summarize(runs, target):
    """Per solver: the loosest tolerance whose run is within ``target`` of the best objective, and its time."""
    summary = {}
    for solver in dict.fromkeys(run["solver"] for run in runs):
        reached = [run for run in runs if run["solver"] == solver and run["relative_gap"] <= target]
        best = max(reached, key=lambda run: run["tolerance"]) if reached else None
        summary[solver] = {"tolerance": best["tolerance"] if best else None,
                           "seconds": best["seconds"] if best else None,
                           "iterations": best["iterations"] if best else None}
    return summary
