"""dlprof's tab in TensorBoard: ``tensorboard --logdir traces`` lists every run under the logdir and shows each one's
report, the HTML report's page, analysed in the background and cached per trace file.

:mod:`dlprof.tensorboard.runs`: the runs under a logdir and the cache of their reports (no TensorBoard import);
:mod:`dlprof.tensorboard.plugin`: the plugin TensorBoard loads through the ``tensorboard_plugins`` entry point.
"""
