import { describe, expect, it } from 'vitest';
import { Lru } from '../../../src/platform/lib/lru.js';

describe('Lru', () => {
  it('forgets the least recently used first, telling onEvict, and holds at most its bound', () => {
    const evicted: Array<[string, number]> = [];
    const lru = new Lru<string, number>(3, { onEvict: (key, value) => evicted.push([key, value]) });
    lru.set('a', 1);
    lru.set('b', 2);
    lru.set('c', 3);
    expect(lru.get('a')).toBe(1);
    lru.set('d', 4);
    expect(evicted).toEqual([['b', 2]]);
    expect([...lru.entries()]).toEqual([
      ['c', 3],
      ['a', 1],
      ['d', 4],
    ]);
    expect(lru.size).toBe(3);
  });

  it('keeps the exact order through runs of hits on the newest entry, and after it is deleted or cleared', () => {
    const lru = new Lru<string, number>(3);
    lru.set('a', 1);
    lru.set('b', 2);
    lru.get('a');
    lru.get('a');
    expect([...lru.entries()].map(([key]) => key)).toEqual(['b', 'a']);
    lru.delete('a');
    lru.set('c', 3);
    lru.set('a', 1);
    lru.get('c');
    lru.get('c');
    expect([...lru.entries()].map(([key]) => key)).toEqual(['b', 'a', 'c']);
    lru.delete('c');
    lru.get('b');
    expect([...lru.entries()].map(([key]) => key)).toEqual(['a', 'b']);
    lru.clear();
    lru.set('x', 1);
    lru.set('y', 2);
    lru.get('x');
    lru.set('z', 3);
    lru.set('w', 4);
    expect([...lru.entries()].map(([key]) => key)).toEqual(['x', 'z', 'w']);
  });

  it('peek leaves the order as it was; set of a held key replaces it as the most recent', () => {
    const lru = new Lru<string, number>(2);
    lru.set('a', 1);
    lru.set('b', 2);
    expect(lru.peek('a')).toBe(1);
    lru.set('c', 3);
    expect(lru.peek('a')).toBeUndefined();
    lru.set('b', 20);
    lru.set('d', 4);
    expect([...lru.entries()]).toEqual([
      ['b', 20],
      ['d', 4],
    ]);
  });

  it('bounds the total weight, refuses what alone is heavier, and tells no one of deletes or clears', () => {
    const evicted: string[] = [];
    const lru = new Lru<string, string>(10, { onEvict: (key) => evicted.push(key) });
    expect(lru.set('a', 'A', 4)).toBe(true);
    expect(lru.set('b', 'B', 4)).toBe(true);
    expect(lru.set('huge', 'H', 11)).toBe(false);
    expect(lru.peek('huge')).toBeUndefined();
    expect(lru.weight).toBe(8);
    lru.set('c', 'C', 5);
    expect(evicted).toEqual(['a']);
    expect(lru.weight).toBe(9);
    expect(lru.delete('b')).toBe(true);
    expect(lru.delete('b')).toBe(false);
    expect(lru.weight).toBe(5);
    lru.clear();
    expect([lru.size, lru.weight]).toEqual([0, 0]);
    expect(evicted).toEqual(['a']);
  });

  it('lets entries be deleted while they are iterated', () => {
    const lru = new Lru<number, number>(10);
    for (let key = 0; key < 6; key++) lru.set(key, key);
    for (const [key] of lru.entries()) if (key % 2 === 0) lru.delete(key);
    expect([...lru.entries()].map(([key]) => key)).toEqual([1, 3, 5]);
    expect(lru.weight).toBe(3);
  });
});
