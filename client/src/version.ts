/** This package's version, as its package.json gives it (a test holds them equal): the default User-Agent names it. */
export const VERSION = '1.0.0';
