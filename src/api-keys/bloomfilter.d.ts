// The package ships JavaScript only; this is the part of it the key filter uses.
declare module 'bloomfilter' {
  export class BloomFilter {
    /** `bits` of memory (rounded up to 32) and `hashes` positions per value. */
    constructor(bits: number, hashes: number);
    add(value: string): void;
    test(value: string): boolean;
  }
}
