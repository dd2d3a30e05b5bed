"""Realistic, seeded tool-call arguments for the generated cases.

This is the part of the case sources that cannot be data: how each declared tool's
arguments are drawn from a case's own ``random.Random``.  The tools themselves are declared
in ``corpus/sources/shared.toml``.
"""

from __future__ import annotations

import json
import random
from typing import Any

CITIES = [
    "Beijing",
    "Shanghai",
    "Tokyo",
    "Paris",
    "London",
    "Delhi",
    "New York",
    "São Paulo",
    "Zürich",
    "Reykjavík",
    "Dallas",
    "Nairobi",
    "Seoul",
    "Berlin",
    "Lagos",
    "Sydney",
]
PATHS = [
    "/srv/app/main.py",
    "/etc/nginx/nginx.conf",
    "/home/kim/notes/todo.md",
    "/workspace/src/lib.rs",
    "/tmp/report.csv",
    "/var/log/syslog",
    "/workspace/package.json",
    "C:\\Users\\kimi\\project\\requirements.txt",
]
COMMANDS = [
    "ls -la",
    "git status --short",
    "pytest -q tests/",
    "grep -rn 'TODO' src/ | head -20",
    "du -sh /var/log/*",
    'python3 -c "print(1+1)"',
    "cat /etc/os-release",
    "find . -name '*.py' -newer setup.cfg",
]
QUERIES = [
    "kimi k2 tool calling format",
    "latest rust release notes",
    "best ramen in Tokyo",
    "how to fix a flaky pytest",
    "vLLM kimi_k2 parser",
    "天气 北京 明天",
    "python json duplicate keys",
    "OpenAI streaming tool_calls index",
]
TOPICS = [
    "Los Angeles today",
    "AI chips",
    "the Champions League final",
    "interest rates",
    "Mars sample return",
]
EXPRESSIONS = ["2**64 - 1", "(3.5 + 4) * 12 / 7", "sqrt(2) * pi", "17 % 5 + 3"]
FILE_BODY = [
    "import sys\n",
    "\n",
    "def main(argv):\n",
    "    if len(argv) < 2:\n",
    '        print("usage: app <name>")\n',
    "        return 2\n",
    '    print(f"hello {argv[1]}")\n',
    "    return 0\n",
    "\n",
    'if __name__ == "__main__":\n',
    "    sys.exit(main(sys.argv))\n",
]


def dumps(args: Any) -> str:
    """Arguments as the model writes them: ', ' and ': ' separators, non-ASCII as is."""
    return json.dumps(args, ensure_ascii=False)


def payload(name: str, r: random.Random) -> dict[str, Any]:
    """Realistic arguments for the tool ``name`` (``{"value": N}`` for a tool not listed here)."""
    draw = _DRAWS.get(name)
    return draw(r) if draw is not None else {"value": r.randint(0, 99)}


def _weather(r: random.Random) -> dict[str, Any]:
    args: dict[str, Any] = {"city": r.choice(CITIES)}
    if r.random() < 0.3:
        args["unit"] = r.choice(["celsius", "fahrenheit"])
    return args


def _shell(r: random.Random) -> dict[str, Any]:
    args: dict[str, Any] = {"command": r.choice(COMMANDS)}
    if r.random() < 0.4:
        args["timeout"] = r.choice([10, 30, 120])
    return args


def _file(r: random.Random) -> dict[str, Any]:
    lines = r.randint(2, 6)
    return {"file_path": r.choice(PATHS), "content": "".join(FILE_BODY[:lines])}


def _todos(r: random.Random) -> dict[str, Any]:
    todos = [
        {"content": "Read config", "status": "completed"},
        {"content": "Fix port", "status": "in_progress"},
        {"content": "Run tests", "status": "pending"},
    ]
    return {"todos": todos[: r.randint(1, 3)]}


def _event(r: random.Random) -> dict[str, Any]:
    return {
        "title": "Design review",
        "start": f"2026-12-0{r.randint(1, 9)}T1{r.randint(0, 7)}:00:00Z",
        "attendees": ["ana@example.com", "li@example.com"][: r.randint(1, 2)],
    }


_DRAWS = {
    "get_weather": _weather,
    "read_file": lambda r: {"path": r.choice(PATHS)},
    "ReadFile": lambda r: {"path": r.choice(PATHS)},
    "write_file": _file,
    "exec_shell": _shell,
    "web_search": lambda r: {"query": r.choice(QUERIES), "max_results": r.randint(1, 10)},
    "api.tools.search": lambda r: {"q": r.choice(QUERIES), "limit": r.randint(1, 50)},
    "gtasks_list-tasklists": lambda r: {"maxResults": r.choice([10, 20, 100])},
    "天气查询": lambda r: {
        "城市": r.choice(["北京", "上海", "深圳", "杭州", "成都"]),
        "日期": f"2026-0{r.randint(1, 9)}-1{r.randint(0, 9)}",
    },
    "send_email": lambda r: {
        "to": r.choice(["ops@example.com", "kim@example.org"]),
        "subject": "Weekly report",
        "body": "Hi,\n\nthe build is green again.\n\n— K",
    },
    "TodoWrite": _todos,
    "get_news": lambda r: {"content": r.choice(TOPICS)},
    "edit": lambda r: {
        "path": r.choice(PATHS[:5]),
        "old_string": "port = 8080",
        "new_string": f"port = {r.randint(8000, 9000)}",
    },
    "calculator": lambda r: {"expression": r.choice(EXPRESSIONS)},
    "create_event": _event,
    "list_directory": lambda r: {
        "path": r.choice(["/workspace", "/srv/app", "/home/kim"]),
        "recursive": r.random() < 0.5,
    },
    "get_coordinates": lambda r: {
        "latitude": round(r.uniform(-80, 80), 4),
        "longitude": round(r.uniform(-170, 170), 4),
    },
}
