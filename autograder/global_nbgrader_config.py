"""nbgrader settings for every account on the server: install as /etc/jupyter/nbgrader_config.py.

Students' servers read it to find the course and the exchange (fetch, submit, fetch feedback);
the grading account reads it too, before the course's own nbgrader_config.py.

``PTXLAB_EXCHANGE`` (default ``/srv/nbgrader/exchange``, nbgrader's own) and
``PTXLAB_COURSE_ID`` (default ``ptx-matrix-lab``) override the defaults; set them in the hub's
``Spawner.environment`` if the server differs.
"""
import os

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

# The exchange: a folder every account can reach, writable by all with the sticky bit
# (chmod 1777), where released assignments wait and submissions arrive.
c.Exchange.root = os.environ.get("PTXLAB_EXCHANGE") or "/srv/nbgrader/exchange"
c.CourseDirectory.course_id = os.environ.get("PTXLAB_COURSE_ID") or "ptx-matrix-lab"
# One exchange for several courses: each course's files under its own folder.
c.Exchange.path_includes_course = True
# Under JupyterHub, a student sees the courses of their 'nbgrader-<course>' groups.
if os.environ.get("JUPYTERHUB_API_URL"):
    from nbgrader.auth import JupyterHubAuthPlugin

    c.Authenticator.plugin_class = JupyterHubAuthPlugin
