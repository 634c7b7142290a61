"""Repository cache, per-run worktrees, and the one git runner."""

# CONTRACT (implemented by the workspace helper):
#
# def run_git(args: Sequence[str], *, cwd: Path, timeout_s: float = 600,
#             credentials: GitCredentials | None = None,
#             env: Mapping[str, str] | None = None, check: bool = True) -> str
#     Argument lists only, cwd always, captured output, GitError(args, code, stderr) on failure
#     or timeout. Credentials are passed per command via GIT_CONFIG_COUNT/KEY/VALUE
#     (http.extraHeader "Authorization: Basic ...") — never in .git/config, the URL or argv.
#     Output is stripped of the trailing newline.
#
# @dataclass(frozen=True)
# class GitCredentials:
#     token: str
#     username: str = "x-access-token"
#
# @dataclass(frozen=True)
# class Worktree:
#     path: Path
#     branch: str           # "reqdrive/<slug>"
#     base_ref: str         # e.g. "main"
#     base_sha: str         # the base branch's commit this run starts from
#     resumed: bool         # the remote already had the branch; worktree starts at its head
#
# class RepositoryCache:
#     def __init__(self, cache_dir: Path) -> None
#     def prepare(self, remote_url: str, *, branch: str, base_ref: str | None, run_id: str,
#                 credentials: GitCredentials | None = None) -> Worktree
#         bare mirror per remote (cache_dir/mirrors/<safe name>.git), created with a clone
#         once and updated with an incremental fetch afterwards; a file lock per mirror; a
#         worktree at cache_dir/worktrees/<run_id> on `branch`, from origin's branch when it
#         exists, else from base_ref (None = remote HEAD). The worktree has user.name/email
#         "reqdrive" set locally so commits work.
#     def push(self, worktree: Worktree, *, credentials: GitCredentials | None = None,
#              force_with_lease: bool = True) -> str     # returns pushed sha
#     def remove(self, worktree: Worktree) -> None
#
# def head_sha(cwd: Path) -> str
# def slugify(text: str, max_len: int = 60) -> str          # safe branch component
