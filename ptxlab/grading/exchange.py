"""nbgrader's collect and release_feedback, never following a link a student could have made,
and never collecting a submission one account made under another student's name.

Students write the exchange's inbound folder. A link there (``ps1.ipynb`` pointing at the
course's source notebook, say) is followed by stock ``nbgrader collect``, which runs as the
grader: the target's content (solutions, hidden tests, another student's work) becomes the
student's submission and comes back to them as feedback. Copied as a link, it stays a link in
``submitted/``, where ``ptxlab grade`` refuses it with a reason
(:mod:`ptxlab.grading.submission_files`). Feedback goes back through the exchange the same way:
a feedback page that is a link, or a feedback folder holding one, is not released (the student
keeps no copy of what the link points at).

Anyone may write the inbound folder, so anyone may make a folder named
``alice+ps1+<a later time>``; stock collect warns that its owner is not ``alice`` and collects
it as her latest submission, over her own. Here it is not collected, and her own latest
submission is (``CollectApp.check_owner``, on by default; off where the exchange is written by
a service account). ``autograder/nbgrader_config.py`` installs them with
``c.ExchangeFactory.collect`` and ``c.ExchangeFactory.release_feedback``.
"""
from __future__ import annotations

import glob
import os
import shutil

from nbgrader.exchange.default.collect import ExchangeCollect, groupby
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
from nbgrader.utils import ignore_patterns

__all__ = ["LinkSafeCollect", "LinkSafeReleaseFeedback", "links_under"]


def links_under(folder: str) -> list[str]:
    """Every link (and the folder itself, if it is one) under ``folder``, never followed."""
    if os.path.islink(folder):
        return [folder]
    found = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        found += [os.path.join(dirpath, n) for n in dirnames + filenames
                  if os.path.islink(os.path.join(dirpath, n))]
    return found


def _size_without_links(folder: str) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(folder, followlinks=False):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                total += os.lstat(path).st_size
    return total


def _owner(path: str) -> str:
    import pwd

    try:
        return pwd.getpwuid(os.lstat(path).st_uid).pw_name
    except KeyError:
        return f"uid {os.lstat(path).st_uid}"


class LinkSafeCollect(ExchangeCollect):
    """``nbgrader collect`` that never follows a link in (or as) a student's submission, and
    collects only submissions owned by the student they name."""

    def init_src(self):
        super().init_src()
        if not self.check_owner or os.name != "posix":
            return
        # nbgrader keeps each student's latest record; the same choice, made among the
        # records the student's own account made.
        pattern = os.path.join(self.inbound_path, "{}+{}+*".format(
            self.coursedir.student_id or "*", self.coursedir.assignment_id))
        records = []
        for path in glob.glob(pattern):
            record = self._path_to_record(path)
            owner = _owner(path)
            if owner != record["username"]:
                self.log.error("%s claims to be submitted by %s but was made by %s: not "
                               "collected", path, record["username"], owner)
                continue
            records.append(record)
        self.src_records = []
        for mine in groupby(records, lambda r: r["username"]).values():
            mine = self._sort_by_timestamp(mine)
            on_time = [r for r in mine if self.duedate is not None and self.before_duedate
                       and r["timestamp"] <= self.duedate]
            self.src_records.append((on_time or mine)[0])

    def do_copy(self, src, dest, log=None):
        if os.path.islink(src):
            self.log.error("%s is a symbolic link, not a submission folder: not collected", src)
            os.makedirs(dest)
            os.symlink(os.readlink(src), os.path.join(dest, "submission-folder-was-a-link"))
            return
        if _size_without_links(src) > 1000 * self.coursedir.max_dir_size:
            raise RuntimeError(f"Directory size is too big: {src}")
        by_rules = ignore_patterns(exclude=self.coursedir.ignore, include=self.coursedir.include,
                                   max_file_size=self.coursedir.max_file_size, log=self.log)

        def ignore(folder, names):
            # nbgrader's rules read each file's size, through a link too: links are kept.
            return set(by_rules(folder, [n for n in names
                                         if not os.path.islink(os.path.join(folder, n))]))

        shutil.copytree(src, dest, symlinks=True, ignore=ignore)
        if self.coursedir.groupshared:
            for dirname, _, filenames in os.walk(dest, followlinks=False):
                os.chmod(dirname, (os.stat(dirname).st_mode | 0o2770) & 0o2777)
                for name in filenames:
                    path = os.path.join(dirname, name)
                    if not os.path.islink(path):
                        os.chmod(path, (os.lstat(path).st_mode | 0o660) & 0o777)


class LinkSafeReleaseFeedback(ExchangeReleaseFeedback):
    """``nbgrader release_feedback`` that releases no student's feedback through a link."""

    def copy_files(self):
        import glob

        refused = set()
        for html in glob.glob(os.path.join(self.src_path, "*.html")):
            folder = os.path.dirname(html)
            links = links_under(folder)
            if links:
                refused.add(folder)
                self.log.error("feedback in %s holds links (%s): not released; regenerate the "
                               "feedback from a submission without links", folder,
                               ", ".join(os.path.basename(l) for l in links[:5]))
        if not refused:
            return super().copy_files()
        saved = self.src_path
        kept = [h for h in glob.glob(os.path.join(saved, "*.html"))
                if os.path.dirname(h) not in refused]
        # nbgrader globs src_path: hand it the safe pages one folder at a time.
        for folder in sorted({os.path.dirname(h) for h in kept}):
            self.src_path = folder
            try:
                super().copy_files()
            finally:
                self.src_path = saved
