// Package python finds the Python interpreter that code starting Python
// uses: $DSSP_PYTHON, else the first of python3 and /usr/bin/python3 that
// imports the modules asked for (numpy, and torch where torch is needed).
// It only runs the candidates with -c "import ..."; it keeps no state and
// imports nothing of this module.
package python
