/**
 * Preloaded into a server process (`node --import`) by the tests of a fatal error: SIGUSR2 throws
 * an error nothing catches, as a bug in any callback would.
 */
process.on('SIGUSR2', () => {
  throw new Error('uncaught on SIGUSR2');
});
