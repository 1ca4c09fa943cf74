"""The commands a bash script runs, read from its text: the first word of every simple command,
including those inside $(...) (also within double quotes), but not words of here-documents,
quoted strings, [[ ]] tests, arithmetic, parameter expansions, array literals or case patterns.

Enough of bash for the project's own scripts in hack/, which keep to a plain style (shellcheck
clean); test_kind_setup.py uses it to check that every command of the kind path is installed by
hack/setup.sh or checked with a message naming what to install.
"""

import re

KEYWORDS = {"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "time", "!", "esac"}
# A segment starting with one of these is not a command call we need to look at.
SKIP_SEGMENT = {"for", "case", "select", "function"}
HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_PATTERN_WORD = r"""(?:"[^"]*"|'[^']*'|[^\s()"'|;])+"""
CASE_PATTERN = re.compile(rf"^\s*\(?{_PATTERN_WORD}(\s*\|\s*{_PATTERN_WORD})*\)")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
REDIRECTION = re.compile(r"^[0-9]*(>>?|<|>&|<&|&>)")
FUNCTION_DEF = re.compile(r"^\s*(?:function\s+)?([A-Za-z_][A-Za-z0-9_:-]*)\s*\(\)", re.M)


def strip_heredocs(text):
    """The script without the bodies of here-documents (YAML, JSON, Dockerfiles...)."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        for match in HEREDOC.finditer(line):
            end = match.group(2)
            while i < len(lines) and lines[i].strip() != end:
                i += 1
            i += 1
    return "\n".join(out)


def strip_case_patterns(text):
    """Remove the `pattern)` at the start of each branch of case ... esac blocks (also the
    one-line `case $x in a | b) ... ;; esac`)."""
    out, depth = [], 0
    for line in text.split("\n"):
        header = re.match(r"^(\s*case\s+\S+\s+in\b)(.*)$", line)
        if header:
            rest = header.group(2)
            if re.search(r"\besac\s*$", rest):
                out.append(header.group(1) + "; " + CASE_PATTERN.sub("", rest, count=1))
            else:
                depth += 1
                out.append(line)
            continue
        stripped = line.strip()
        if depth and re.match(r"^esac\b", stripped):
            depth -= 1
        elif depth and CASE_PATTERN.match(line) and _is_branch_start(out):
            line = CASE_PATTERN.sub("", line, count=1)
        out.append(line)
    return "\n".join(out)


def _is_branch_start(previous_lines):
    """A case pattern starts a branch: right after `case ... in` or after a line ending in ;;."""
    for line in reversed(previous_lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        return stripped.endswith(";;") or re.search(r"\bin$", stripped) is not None
    return False


def _skip_balanced(text, i, opener, closer):
    """Index just past the `closer` matching the `opener` that ends at text[i-1]."""
    depth = 1
    while i < len(text) and depth:
        if text.startswith(opener, i):
            depth += 1
            i += len(opener)
        elif text.startswith(closer, i):
            depth -= 1
            i += len(closer)
        else:
            i += 1
    return i


def segments(text):
    """Split code into command segments (the text between separators); the inside of a
    $( ... ) is a segment list of its own, and stands as one word @s in the command around it."""
    text = strip_case_patterns(strip_heredocs(text.replace("\\\n", " ")))
    parts = []
    # One frame per nesting level: [state, buffer, open parentheses]; state is "code" or "dq"
    # (inside double quotes, where only $( ... ) matters).
    frames = [["code", [], 0]]
    i = 0

    def cut(buffer):
        parts.append("".join(buffer))
        buffer.clear()

    while i < len(text):
        c = text[i]
        state, current = frames[-1][0], frames[-1][1]
        if state == "dq":
            if c == "\\":
                i += 2
            elif text.startswith("$(", i) and not text.startswith("$((", i):
                frames.append(["code", [], 0])
                i += 2
            elif c == '"':
                frames.pop()
                frames[-1][1].append("@q")
                i += 1
            else:
                i += 1
            continue
        prev = text[i - 1] if i else "\n"
        nxt = text[i + 1] if i + 1 < len(text) else "\n"
        at_word_start = prev in " \t\n;|&()"
        if c == "\\":
            current.append(text[i:i + 2])
            i += 2
        elif c == "'":
            end = text.find("'", i + 1)
            i = len(text) if end < 0 else end + 1
            current.append("@q")
        elif c == '"':
            frames.append(["dq", current, 0])
            i += 1
        elif c == "#" and at_word_start:
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
        elif text.startswith("$((", i):
            i = _skip_balanced(text, i + 3, "((", "))")
            current.append("@n")
        elif text.startswith("((", i) and at_word_start:
            i = _skip_balanced(text, i + 2, "((", "))")
        elif text.startswith("${", i):
            i = _skip_balanced(text, i + 2, "{", "}")
            current.append("@v")
        elif text.startswith("[[", i) and at_word_start:
            end = text.find("]]", i)
            i = len(text) if end < 0 else end + 2
        elif text.startswith("=(", i):
            i = _skip_balanced(text, i + 2, "(", ")")
            current.append("=@a")
        elif text.startswith("$(", i):
            frames.append(["code", [], 0])
            i += 2
        elif c == "(":
            frames[-1][2] += 1
            cut(current)
            i += 1
        elif c == ")":
            if frames[-1][2] == 0 and len(frames) > 1:
                # The end of a $( ... ): its last segment, then back to the word around it.
                cut(current)
                frames.pop()
                if frames[-1][0] == "code":
                    frames[-1][1].append("@s")
            else:
                frames[-1][2] = max(0, frames[-1][2] - 1)
                cut(current)
            i += 1
        elif c == "&" and (prev in "<>" or nxt == ">"):
            current.append(c)  # >&2, 2>&1, &>file: a redirection, not a separator
            i += 1
        elif c in "\n;|&" or (c in "{}" and prev in " \t\n;&|(" and nxt in " \t\n;"):
            cut(current)
            i += 1
        else:
            current.append(c)
            i += 1
    for frame in reversed(frames):
        if frame[0] == "code":
            cut(frame[1])
    return [p.strip() for p in parts if p.strip()]


def first_word(segment):
    """The command a segment runs, or None (assignments only, a loop header, a keyword alone)."""
    words = segment.split()
    while words and (words[0] in KEYWORDS or ASSIGNMENT.match(words[0]) or REDIRECTION.match(words[0])):
        if REDIRECTION.match(words[0]) and re.fullmatch(r"[0-9]*(>>?|<|&>)", words[0]) and len(words) > 1:
            words = words[1:]  # `> file` with a space: the file is not the command
        words = words[1:]
    if not words or words[0] in SKIP_SEGMENT:
        return None
    return words[0]


def commands(text):
    """Every command word the script runs (first words of its simple commands), each once."""
    seen = []
    for segment in segments(text):
        word = first_word(segment)
        if word and word not in seen:
            seen.append(word)
    return seen


def defined_functions(text):
    return set(FUNCTION_DEF.findall(text))
