"""Test, lint and custom gates, run by the worker, never trusted to the agent."""

# CONTRACT (implemented by the agents/processes helper):
#
# class GateSpec(BaseModel):  (extra="forbid", camelCase aliases accepted)
#     name: str
#     command: str                      # run with bash -c, in the worktree
#     timeout_s: float = 900 (alias "timeout")
#     junit: bool = False               # the command writes JUnit XML to $REQDRIVE_JUNIT_XML
#
# @dataclass(frozen=True)
# class GateResult:
#     name: str
#     command: str
#     passed: bool
#     exit_code: int | None
#     timed_out: bool
#     duration_s: float
#     output_tail: str                  # redacted
#     failed_tests: frozenset[str] | None   # from JUnit XML when junit=True, else None
#     def to_json() -> dict
#
# def gate_specs(test_command: str | None, lint_command: str | None,
#                gates: Sequence[GateSpec]) -> list[GateSpec]    # "tests", "lint", then custom
#
# def run_gates(specs: Sequence[GateSpec], *, cwd: Path, env: Mapping[str, str],
#               output_dir: Path, label: str, redactor: Redactor,
#               parallel: bool = False, fail_fast: bool = True) -> list[GateResult]
#     Sequential fail-fast by default (later gates not run are absent from the list);
#     parallel runs all at once. Writes output_dir/<label>.gates.json (list of to_json())
#     and each gate's full redacted log to output_dir/<label>.<gate>.log.
