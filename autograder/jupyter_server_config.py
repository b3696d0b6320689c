"""Jupyter Server settings for the instructor's formgrader on the grading account.

Start it in the course root: ``jupyter server --config=autograder/jupyter_server_config.py``
(behind JupyterHub it runs as the grading account's single-user server, see README.md). It
serves only nbgrader's formgrader; students use their own servers with the assignment list.
"""
c = get_config()  # noqa: F821 - provided by Jupyter when it loads this file

c.ServerApp.jpserver_extensions = {
    "nbgrader.server_extensions.formgrader": True,
    "nbgrader.server_extensions.assignment_list": False,
    "nbgrader.server_extensions.course_list": False,
    "nbgrader.server_extensions.validate_assignment": False,
}
c.ServerApp.ip = "127.0.0.1"          # reached through JupyterHub's proxy or an SSH tunnel
c.ServerApp.open_browser = False
c.ServerApp.default_url = "/formgrader"
