"""``mpiopt slurm``: render a workload's batch script, submit it, optionally wait for it.
"""
import sys

from .common import CheckingParser, CommandError


def add_parser(commands):
    from ..core.registry import names
    from ..slurm.render import SCRIPT_OPTIONS
    slurm = commands.add_parser(
        "slurm", help="render a batch script for a workload, submit it with sbatch, optionally wait",
        description="Render a Slurm batch script (names and paths quoted safely), submit it with sbatch and, "
                    "with --wait, follow it with squeue/scontrol and return the job's exit code. "
                    "Arguments after -- go to the workload, e.g. mpiopt slurm solve -n 4 -- --loss logistic.")
    slurm.add_argument("workload", choices=names("workload"))
    slurm.add_argument("-n", "--ntasks", type=int, default=2)
    slurm.add_argument("-c", "--cpus-per-task", type=int, default=1)
    slurm.add_argument("-t", "--time", default="00:10:00", help="time limit (default %(default)s)")
    slurm.add_argument("-J", "--job-name")
    slurm.add_argument("-p", "--partition")
    slurm.add_argument("--signal-seconds", type=int, default=60,
                       help="SIGUSR1 this many seconds before the limit: checkpoint and requeue (0: none)")
    slurm.add_argument("--launcher", choices=["srun", "mpiexec"], default="srun")
    mpi = SCRIPT_OPTIONS["mpi"]
    slurm.add_argument("--mpi", default=mpi.default, metavar="PLUGIN", help=f"{mpi.help} (default %(default)s)")
    slurm.add_argument("--script", default=None, help="where to write the batch script (default JOBNAME.sbatch)")
    slurm.add_argument("--render-only", action="store_true", help="print the script and do not submit it")
    slurm.add_argument("--wait", action="store_true", help="wait for the job and exit with its exit code")
    slurm.set_defaults(run=run_slurm, workload_args=[], parser=slurm)


def workload_argument_problem(workload, arguments):
    """Why ``arguments`` would fail the Slurm ``workload``'s own parser (one line), or None.

    mpiopt's subcommands are parsed by the command line's parser, the benchmark scripts by their
    ``parse_args`` (found in the current folder, where the job runs, or beside the package); a workload that
    is neither is not checked."""
    import contextlib
    import importlib.util
    import io
    import os

    from ..core.registry import lookup
    argv = list(lookup("workload", workload).argv)
    if argv[:2] == ["-m", "mpiopt"]:
        from . import parse_arguments
        try:
            args = parse_arguments(argv[2:] + list(arguments), CheckingParser)
        except CommandError as error:
            return str(error)
        check = getattr(args, "check", None)  # the checks of the options alone, without data or ranks
        return check(args) if check else None
    if argv[:1] == ["-m"] or not argv:
        return None
    candidates = [os.path.abspath(argv[0]), os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), argv[0])]
    script = next((path for path in candidates if os.path.isfile(path)), None)
    if script is None:
        return None
    spec = importlib.util.spec_from_file_location(f"mpiopt_workload_{workload.replace('-', '_')}", script)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(script))  # as when it runs: its helper modules beside it
    try:
        spec.loader.exec_module(module)
        if not hasattr(module, "parse_args"):
            return None
        errors = io.StringIO()
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            module.parse_args(list(arguments) + argv[1:])
    except SystemExit as exit:
        lines = errors.getvalue().strip().splitlines()
        if exit.code and lines:  # argparse's "PROG: error: MESSAGE", PROG being this process's name
            return f"{argv[0]}: {lines[-1].split('error: ', 1)[-1]}"
        return f"{argv[0]}: the arguments ask for help, the job would run nothing"
    finally:
        sys.path.remove(os.path.dirname(script))
    return None


def run_slurm(args, comm):
    from ..slurm import SlurmError, render_script, submit, wait
    workload_args = args.workload_args
    output = [a for i, a in enumerate(workload_args) if i and workload_args[i - 1] == "--output"]
    problem = workload_argument_problem(args.workload, workload_args)
    if problem:
        raise CommandError(f"the arguments of workload {args.workload}: {problem}")
    try:
        text = render_script(args.workload, workload_args, job_name=args.job_name, ntasks=args.ntasks,
                             cpus_per_task=args.cpus_per_task, time=args.time, python=sys.executable,
                             launcher=args.launcher, mpi=args.mpi, signal_seconds=args.signal_seconds or None,
                             partition=args.partition)
        if args.render_only:
            print(text, end="")
            return 0
        script = args.script or f"{args.job_name or 'mpiopt-' + args.workload}.sbatch"
        job_id = submit(text, script)
        print(f"submitted job {job_id} ({script})", flush=True)
        if not args.wait:
            return 0
        result = wait(job_id, result=output[-1] if output else None)
    except (ValueError, SlurmError) as error:
        raise CommandError(str(error)) from None
    print(f"job {job_id} {result.state} with exit code {result.exit_code} after {result.restarts} requeue(s); "
          f"log {result.output}" + (f"; result {result.result}" if result.result else ""))
    return result.exit_code
